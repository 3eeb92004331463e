"""Media in and out through FFmpeg's libraries (PyAV): the source that decodes pictures and copies
packets, planes and colour, fields, and the writer that encodes them back."""
