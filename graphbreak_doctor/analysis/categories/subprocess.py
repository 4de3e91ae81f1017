"""subprocess: the stack runs a child process (FlashInfer's `nvcc --version` probe).

``subprocess.check_output`` surfaces as a skipped ``_thread.allocate_lock``
inside ``subprocess.py`` (Popen.__init__), so the stack decides, not the message.
"""

from graphbreak_doctor.analysis.categories.category import Category, Rule

CATEGORY = Category(
    name="subprocess",
    why="the stack runs a child process",
    evidence="the stack runs a child process (`subprocess.py`)",
    rules=(Rule(through=("subprocess",),
                culprits=("_posixsubprocess.", "posix.fork", "posix.system", "posix.popen", "posix.posix_spawn",
                          "posix.waitpid", "os.system", "os.popen")),),
    advice="hoist-subprocess",
    ladder=("use-registered-op", "hoist-subprocess", "compiler-disable", "wrap-custom-op"),
    priority=30,
)
