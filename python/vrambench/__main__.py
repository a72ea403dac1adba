"""``python -m vrambench ...``: the vrambench command."""

from ._cli import console

console()
