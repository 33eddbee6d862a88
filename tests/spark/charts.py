"""Checks of the report's chart: a PNG that matplotlib wrote, of the size the
report asks for, showing both series."""

from __future__ import annotations

from disque.spark.report import CHART_DPI, CREATED_COLOR, DELETED_COLOR, figure_size_in

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MATPLOTLIB_SOFTWARE = b"Software\x00Matplotlib"   # the tEXt chunk matplotlib writes
COLOR_TOLERANCE = 0.02


def check_chart(path: str, panels: int, series_drawn: bool = True):
    """Assert that ``path`` is matplotlib's PNG with ``panels`` panels and is
    not blank; return its pixels (rows, columns, RGBA floats)."""
    from matplotlib.colors import to_rgb
    from matplotlib.image import imread

    data = open(path, "rb").read()
    assert data.startswith(PNG_SIGNATURE)
    assert MATPLOTLIB_SOFTWARE in data
    pixels = imread(path)
    width_in, height_in = figure_size_in(panels)
    assert pixels.shape == (round(height_in * CHART_DPI), round(width_in * CHART_DPI), 4)
    rgb = pixels[:, :, :3]
    assert rgb.min() < 0.2 and rgb.max() == 1.0, "a blank image"
    for color in (CREATED_COLOR, DELETED_COLOR):
        found = (abs(rgb - to_rgb(color)) < COLOR_TOLERANCE).all(axis=2).sum()
        assert (found > 100) == series_drawn, (color, found)
    return pixels
