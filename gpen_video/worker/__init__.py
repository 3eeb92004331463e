"""One device's work: the typed messages the pipeline sends a worker, and the worker that does it
(detect, align, GPEN, paste back)."""
