"""The bottom layer: errors, settings, the stage dataclasses, paths, safe reads, SQL files.

Everything else in quarry imports from here; nothing here imports another quarry package.
"""
