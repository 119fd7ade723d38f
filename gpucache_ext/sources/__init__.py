"""The identity of a kernel's source: what the typing token hashes, and the
snapshot the kernel is typed and lowered from.

numba freezes into a kernel everything the kernel reads at compile time: its
bytecode, the values of the globals and closure variables it names, the
attributes it reads through modules, and the device functions it calls (with,
transitively, what those read).  `identify` walks all of that and gives one
named component per input, so a miss can say "global OFFSET changed",
"global cfg.sub.K 3 -> 5", "global ALPHA 1.5 -> 3.0 (read by helper)" or
"device function helper: code changed".

What is read, precisely:

* Globals and closure variables by the names the bytecode loads.  Attribute
  chains that start at a module (``pkg.sub.K``) are followed through every
  module, and only the attributes the code reads count.  A module is a library
  or user code by where its file lives (the standard library's folder,
  site-packages), never by its name: a library is keyed by its version, user
  code by the attributes read.
* Values by content: numbers, strings, tuples, enum classes and members (every
  member), named-tuple classes (fields and defaults), numpy arrays (contents,
  full dtype description, shape, strides and flags), numpy scalars, numba
  types.  A value whose changes could not be detected is refused with
  `UnsupportedKernelError` rather than guessed at.

Line numbers and file names reach the output only through debug information,
so they enter the identity only when debug info (``debug`` or ``lineinfo``)
is requested.

What is hashed is also what is compiled: arrays are copied when hashed, and
`rebind` returns a copy of the function that reads those copies (and module
clones holding them), with its device functions replaced by the pipeline's
proxies.  Typed IR cached from it therefore never sees a later edit of the
original objects.

The modules, each leaning only on those before it: `values` (plain values
and numpy contents, exactly), `code` (what bytecode reads, and its digest),
`snapshot` (`SourceIdentity`, the bindings and `rebind`), `functions`
(dispatchers, declared signatures), `describe` (numba types, classes,
registrations, closures numba compiles), `library` (library modules and
functions), `walk` (`identify`).  The one way back: a user class is
described by its functions' identities, which `describe` asks of the walk
through `describe.function_digest` (set by `walk`).
"""

from .code import CodeReads, code_reads
from .describe import describe_class, describe_registration, internal_function_digest, signature_component, type_data
from .functions import (declare_signatures, declared_signatures, def_line, is_device_dispatcher, pure_python,
                        python_function, shown_signature)
from .library import library_identity_digest, library_module_component, library_reads_changed
from .snapshot import SourceIdentity, host_array_interface, rebind
from .walk import identify

__all__ = [
    "CodeReads", "SourceIdentity", "code_reads", "declare_signatures", "declared_signatures", "def_line",
    "describe_class", "describe_registration", "host_array_interface", "identify", "internal_function_digest",
    "is_device_dispatcher", "library_identity_digest", "library_module_component", "library_reads_changed",
    "pure_python", "python_function", "rebind", "shown_signature", "signature_component", "type_data",
]
