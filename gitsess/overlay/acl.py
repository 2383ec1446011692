"""POSIX access ACLs (`system.posix_acl_access`) as the kernel keeps them for a local file.

Tools that copy permissions (GNU `sed -i`, `cp -p`, `install`, through libacl) set a file's mode
by writing its ACL rather than by chmod. The kernel turns an ACL that says no more than the mode
bits into those bits and stores nothing; an extended one (named users or groups, a mask) is
stored and sets the bits too: the owner's, the mask's as the group's, the others'. So must the
view, or such a file keeps the 0600 its temporary file was made with.
"""

from __future__ import annotations

import errno
import os
import struct

ACCESS = b"system.posix_acl_access"
_VERSION = 2
_HEADER = struct.Struct("<I")
_ENTRY = struct.Struct("<HHI")
# <linux/posix_acl.h> tags
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20


def mode_bits(value: bytes) -> tuple[int, bool]:
    """The permission bits an access ACL sets, and whether it is minimal (says no more than
    those bits, and is then not kept). EINVAL for a malformed one, as the kernel answers."""
    body = len(value) - _HEADER.size
    if body < 0 or body % _ENTRY.size or _HEADER.unpack_from(value)[0] != _VERSION:
        raise _einval()
    perms: dict[int, int] = {}
    extended = False
    for offset in range(_HEADER.size, len(value), _ENTRY.size):
        tag, perm, _id = _ENTRY.unpack_from(value, offset)
        if tag in (USER, GROUP):
            extended = True
        elif tag in (USER_OBJ, GROUP_OBJ, MASK, OTHER):
            if tag in perms:
                raise _einval()
            perms[tag] = perm & 0o7
        else:
            raise _einval()
    if USER_OBJ not in perms or GROUP_OBJ not in perms or OTHER not in perms:
        raise _einval()
    if extended and MASK not in perms:
        raise _einval()
    group = perms.get(MASK, perms[GROUP_OBJ])
    bits = perms[USER_OBJ] << 6 | group << 3 | perms[OTHER]
    return bits, not extended and MASK not in perms


def _einval() -> OSError:
    return OSError(errno.EINVAL, os.strerror(errno.EINVAL))
