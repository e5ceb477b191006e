"""The simulator: the site's policy replayed in virtual time, with no Django (docs/simulation.md)."""
