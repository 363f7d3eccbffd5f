"""The ``lessonbank`` command line."""
