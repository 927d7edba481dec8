"""``python -m derain``: the ``derain`` command (``derain.cli``)."""

from derain.cli import main

raise SystemExit(main())
