import sys

from rosenna.cli import main

sys.exit(main())
