"""The editor's desk: a local web page over one warm engine (``gpen-video ui FOLDER...``)."""
