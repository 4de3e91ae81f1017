"""filesystem: stat, open, path resolution, file locks (FlashInfer's JIT cache checks).

``Path.exists()`` surfaces as a skipped ``posix.stat`` inside ``pathlib.py``;
``with open(p) as f:`` as a second break, "Unsupported context manager" on the
file object (``_io.TextIOWrapper``): file objects, memory maps, temporary files
and directory iterators are file-system work wherever Dynamo meets them.
"""

from graphbreak_doctor.analysis.categories.category import Category, Rule

CATEGORY = Category(
    name="filesystem",
    why="the stack touches the file system",
    evidence="`posix.stat`, `os.path`, `pathlib`, `open` and file objects, file locks",
    rules=(Rule(through=("pathlib", "genericpath", "posixpath", "ntpath", "shutil", "glob", "fnmatch", "tempfile",
                         "fcntl", "filecmp"),
                culprits=("posix.stat", "posix.lstat", "posix.listdir", "posix.scandir", "posix.open", "posix.access",
                          "posix.mkdir", "posix.makedirs", "posix.remove", "posix.unlink", "posix.rename",
                          "posix.readlink", "posix.getcwd", "posix.fspath", "posix.utime", "io.open", "_io.open",
                          "builtins.open", "fcntl.", "filelock.",
                          # File objects, as Dynamo names their types.
                          "_io.TextIOWrapper", "_io.BufferedReader", "_io.BufferedWriter", "_io.BufferedRandom",
                          "_io.BufferedRWPair", "_io.FileIO", "mmap.", "tempfile.", "posix.ScandirIterator",
                          "posix.DirEntry", "nt.ScandirIterator", "nt.DirEntry",
                          # The same types by the bare names of Dynamo's message text.
                          "TextIOWrapper", "BufferedReader", "BufferedWriter", "BufferedRandom", "BufferedRWPair",
                          "FileIO", "ScandirIterator", "_TemporaryFileWrapper", "SpooledTemporaryFile",
                          "TemporaryDirectory")),),
    advice="hoist-filesystem",
    ladder=("use-registered-op", "hoist-filesystem", "compiler-disable", "wrap-custom-op"),
    priority=40,
)
