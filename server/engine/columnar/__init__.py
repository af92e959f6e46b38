"""The columnar path: built-in monoids over count and time ranges, a batch of columns at a
time, per-row results from array passes (window.py); the monoids as array kernels
(kernels.py); aggregates over many ranges at once without inverses (ranges.py), and over a
sliding window's ranges in one compiled pass (slide.py)."""

from .window import BatchResult, ColumnarWindow, columnar_refusal

__all__ = ["BatchResult", "ColumnarWindow", "columnar_refusal"]
