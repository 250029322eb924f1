"""A seccomp filter that keeps unix sockets closed when the network is off.

The network namespace cuts a sandbox off from the host's TCP/IP and abstract unix
sockets, but a unix socket *file* in the workspace (an agent's, a database's, a
forwarded SSH agent's) is reachable through the file system. ``connect`` cannot be
filtered by address (seccomp sees pointers, not the memory behind them), so the filter
refuses ``socket(AF_UNIX, …)`` itself: nothing in the sandbox can open a unix socket to
connect with. ``socketpair`` (anonymous, connected to nothing) stays allowed. The filter
also refuses ``io_uring_setup`` (io_uring can open sockets without the ``socket`` call)
and every system call of another ABI (x32, i386), which would bypass the numbers checked.

The program is classic BPF, written here byte for byte (no libseccomp binding needed),
and handed to bubblewrap with ``--seccomp FD``.
"""

from __future__ import annotations

import errno
import platform
import struct
from typing import Final

__all__ = ["unix_socket_filter", "unix_socket_filter_support"]

# struct sock_filter { u16 code; u8 jt; u8 jf; u32 k; }
_LD_ABS_W: Final = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K: Final = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K: Final = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RET_K: Final = 0x06  # BPF_RET | BPF_K
_ALLOW: Final = 0x7FFF0000
_ERRNO: Final = 0x00050000
# offsets in struct seccomp_data: nr, arch, instruction_pointer, args[6]
_NR: Final = 0
_ARCH: Final = 4
_ARG0_LOW: Final = 16  # little-endian: the low 32 bits of args[0] come first
_AF_UNIX: Final = 1
_X32_BIT: Final = 0x40000000

# machine -> (audit arch, socket, io_uring_setup, has an x32 ABI to refuse)
_ARCHES: Final[dict[str, tuple[int, int, int, bool]]] = {
    "x86_64": (0xC000003E, 41, 425, True),
    "aarch64": (0xC00000B7, 198, 425, False),
}


def unix_socket_filter_support(machine: str | None = None) -> str | None:
    """``None`` when the filter can be built for this machine, else why not."""
    name = machine or platform.machine()
    return None if name in _ARCHES else f"no seccomp filter for the {name} architecture (x86_64 and aarch64 only)"


def unix_socket_filter(machine: str | None = None) -> bytes:
    """The BPF program (``struct sock_filter`` array) for this machine's architecture."""
    name = machine or platform.machine()
    if name not in _ARCHES:
        raise ValueError(unix_socket_filter_support(name))
    arch, nr_socket, nr_io_uring_setup, x32 = _ARCHES[name]
    program: list[tuple[int, int, int, int]] = [
        (_LD_ABS_W, 0, 0, _ARCH),
        (_JEQ_K, 1, 0, arch),
        (_RET_K, 0, 0, _ERRNO | errno.EPERM),  # another ABI
        (_LD_ABS_W, 0, 0, _NR),
    ]
    if x32:
        program += [(_JGE_K, 0, 1, _X32_BIT), (_RET_K, 0, 0, _ERRNO | errno.EPERM)]
    program += [
        (_JEQ_K, 0, 1, nr_io_uring_setup),
        (_RET_K, 0, 0, _ERRNO | errno.ENOSYS),
        (_JEQ_K, 0, 3, nr_socket),
        (_LD_ABS_W, 0, 0, _ARG0_LOW),
        (_JEQ_K, 0, 1, _AF_UNIX),
        (_RET_K, 0, 0, _ERRNO | errno.EAFNOSUPPORT),
        (_RET_K, 0, 0, _ALLOW),
    ]
    return b"".join(struct.pack("<HBBI", *insn) for insn in program)
