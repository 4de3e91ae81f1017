"""filesystem: stat, open, path resolution, file locks (FlashInfer's JIT cache checks).

``Path.exists()`` surfaces as a skipped ``posix.stat`` inside ``pathlib.py``.
"""

from graphbreak_doctor.analysis.categories.category import Category, Rule

CATEGORY = Category(
    name="filesystem",
    why="the stack touches the file system",
    evidence="`posix.stat`, `os.path`, `pathlib`, `open`, file locks",
    rules=(Rule(through=("pathlib", "genericpath", "posixpath", "ntpath", "shutil", "glob", "fnmatch", "tempfile",
                         "fcntl", "filecmp"),
                culprits=("posix.stat", "posix.lstat", "posix.listdir", "posix.scandir", "posix.open", "posix.access",
                          "posix.mkdir", "posix.makedirs", "posix.remove", "posix.unlink", "posix.rename",
                          "posix.readlink", "posix.getcwd", "posix.fspath", "posix.utime", "io.open", "_io.open",
                          "builtins.open", "fcntl.", "filelock.")),),
    advice="hoist-filesystem",
    ladder=("use-registered-op", "hoist-filesystem", "compiler-disable", "wrap-custom-op"),
    priority=40,
)
