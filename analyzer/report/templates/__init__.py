"""Jinja2 templates of the HTML report (a package so wheels carry them)."""
