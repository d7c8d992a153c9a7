"""``python -m saber.sim.http``: the same as the ``saber-sim`` command."""

from saber.sim.http.cli import main

main()
