"""``python -m saber.profile``: the same as the ``saber-profile`` console script."""

import sys

from saber.profile.cli import main

sys.exit(main())
