"""``python -m tablesafe._cli``: the command line."""

from tablesafe._cli import main

main()
