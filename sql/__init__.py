"""DuckDB SQL files, installed as ``quarry.sql`` package data; read with ``quarry.core.sqlfiles``."""
