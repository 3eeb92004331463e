"""GPEN: the reference module that loads official checkpoints (reference.py), the fast inference
build of it (fast.py), and the checkpoints one can choose (choices.py)."""
