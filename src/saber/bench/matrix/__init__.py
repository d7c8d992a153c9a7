"""``saber-bench matrix``: every policy on a grid of engines, loads and SLAs, on traces
held out from the ones a policy was chosen on; its summary, report and plots."""
