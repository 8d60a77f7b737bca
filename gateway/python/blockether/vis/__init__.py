"""Vis SDK packages (see ``blockether.vis.extension``)."""
