"""Leaf utilities every layer may use (they import nothing else of pallaslab)."""
