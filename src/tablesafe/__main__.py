"""``python -m tablesafe``: the command line."""

from tablesafe._cli import main

main()
