"""Reading and writing video through FFmpeg's libraries (PyAV)."""
