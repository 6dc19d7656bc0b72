"""Edge runtimes behind one small interface (see base.py); each backend in its own module."""
