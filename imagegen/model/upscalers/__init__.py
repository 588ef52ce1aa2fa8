"""Upscalers: the ESRGAN family (RRDBNet) and Pillow's filters behind one interface, run in
tiles sized to a memory budget."""
