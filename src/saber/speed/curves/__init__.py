"""The speed curves f(L) that can be fitted: the paper's USL and its solo variant, and
the baselines it was compared with (logistic, MaaSO's log decay, linear). Each is a
``saber.speed.SpeedModel``; ``saber.speed`` registers them by kind."""
