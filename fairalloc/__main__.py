"""``python -m fairalloc``: the same CLI as the ``fairalloc`` command."""

import sys

from fairalloc.cli import main

sys.exit(main())
