"""Build script for the optional compiled hot loops (Cython extension modules).

Everything else about the package is in ``pyproject.toml``. Each hot-loop module
listed in ``EXTENSIONS`` has a pure-Python reference next to it (``_xxh3_c``, the
XXH3-64 they cimport, is the xxhash package's own function, which the references
call directly); the compiled one is used when it imports and
``HEADWATER_NO_EXTENSIONS=1`` is not set (see ``headwater._native``). Setting
``HEADWATER_NO_EXTENSIONS=1`` at build time skips compiling them altogether (a
machine without a C compiler still installs).
"""

import os

from setuptools import Extension, setup

# (dotted module name, .pyx source) of every compiled module; _xxh3_c first, as the
# others cimport it (XXH3-64 from the xxHash library, see its docstring)
EXTENSIONS: list[tuple[str, str]] = [
    ("headwater.codec._xxh3_c", "src/headwater/codec/_xxh3_c.pyx"),
    ("headwater.codec._batch_c", "src/headwater/codec/_batch_c.pyx"),
    ("headwater.codec.kafka._convert_c", "src/headwater/codec/kafka/_convert_c.pyx"),
    ("headwater.storage.local._pread_c", "src/headwater/storage/local/_pread_c.pyx"),
    ("headwater.storage.local._sync_c", "src/headwater/storage/local/_sync_c.pyx"),
]


def ext_modules() -> list:
    if os.environ.get("HEADWATER_NO_EXTENSIONS") == "1" or not EXTENSIONS:
        return []
    from Cython.Build import cythonize

    exts = [Extension(name, [source], extra_compile_args=["-O3"]) for name, source in EXTENSIONS]
    return cythonize(exts, language_level=3, compiler_directives={"boundscheck": False, "wraparound": False})


setup(ext_modules=ext_modules())
