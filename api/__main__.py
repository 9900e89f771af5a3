"""``python -m api`` is the ``foreshock`` command."""

from api.cli import main

main()
