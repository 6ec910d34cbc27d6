"""Where an inventory entry's password comes from, read once per parse.

A password is written inline, read from a file (``password_file``) or from
an environment variable (``password_env``); an entry, a method or
``defaults`` names at most one source. A file holding a secret that
others may read is noted as a :class:`ModeWarning`.
"""

import dataclasses
import os
import stat

from instanceha.drivers.fencing.inventory_entry import InventoryError

#: where a password may come from; an entry (or a method, or ``defaults``)
#: sets at most one of them
SECRET_FIELDS = ("password", "password_file", "password_env")


@dataclasses.dataclass(frozen=True)
class ModeWarning:
    """A file holding a secret that users other than its owner may read.
    Names the file and its mode, never what it holds."""

    path: str
    mode: int
    what: str           # "password file" or "inventory"

    def __str__(self):
        return ("%s %s is readable by its group or others (mode %04o); "
                "chmod 600 it" % (self.what, self.path, self.mode))


def readable_by_others(mode):
    return bool(mode & (stat.S_IRGRP | stat.S_IROTH))


class Secrets:
    """Reads password files and variables once per parse, noting files
    with a loose mode."""

    def __init__(self, base_dir, environ):
        self.base_dir = base_dir
        self.environ = os.environ if environ is None else environ
        self.files = {}
        self.warnings = []

    def from_file(self, where, path):
        if not os.path.isabs(path) and self.base_dir:
            path = os.path.join(self.base_dir, path)
        if path in self.files:
            return self.files[path]
        try:
            with open(path, "rb") as f:
                mode = os.fstat(f.fileno()).st_mode
                raw = f.read()
        except OSError as e:
            raise InventoryError("%s: field password_file: cannot read %s: %s"
                                 % (where, path, e.strerror or e))
        except ValueError as e:     # a NUL in the path
            raise InventoryError("%s: field password_file: cannot read %r: "
                                 "%s" % (where, path, e))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InventoryError("%s: field password_file: %s is not UTF-8 "
                                 "text" % (where, path))
        text = text.rstrip("\r\n")
        if not text:
            raise InventoryError("%s: field password_file: %s is empty"
                                 % (where, path))
        if readable_by_others(mode):
            self.warnings.append(ModeWarning(path, stat.S_IMODE(mode),
                                             "password file"))
        self.files[path] = text
        return text

    def from_env(self, where, name):
        value = self.environ.get(name)
        if value is None:
            raise InventoryError("%s: field password_env: environment "
                                 "variable %s is not set" % (where, name))
        if not value:
            raise InventoryError("%s: field password_env: environment "
                                 "variable %s is empty" % (where, name))
        return value


def sources(level):
    return [f for f in SECRET_FIELDS if f in level]


def check_sources(where, level):
    found = sources(level)
    if len(found) > 1:
        raise InventoryError("%s: fields %s and %s are both set; a password "
                             "comes from one of %s" % (
                                 where, found[0], found[1],
                                 ", ".join(SECRET_FIELDS)))
    for field in found:
        if not isinstance(level[field], str):
            raise InventoryError("%s: field %s must be a string"
                                 % (where, field))
        if field != "password" and not level[field]:
            raise InventoryError("%s: field %s is empty" % (where, field))
