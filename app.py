"""The repository's launcher of the web page: ``python app.py`` is ``python -m derain.app`` (derain/app.py)."""

import sys

from derain.app import main

if __name__ == "__main__":
    sys.exit(main())
