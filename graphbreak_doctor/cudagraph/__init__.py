"""The CUDA-graph map: a target, or a framework's forward, captured into CUDA
graphs on the emulated GPU as a server captures it, with the capture's
segments, break points and hazards (recorder.py, which shows what runs in a
segment to the hazard detectors, detectors/; the plain capture of a
target: capture.py; a framework's own capture path lives with the framework,
under graphbreak_doctor/targets/frameworks/)."""
