"""Retrieval evaluation: metrics and BEIR-style collections indexed as file trees."""
