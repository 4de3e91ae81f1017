from graphbreak_doctor.cli import main

raise SystemExit(main())
