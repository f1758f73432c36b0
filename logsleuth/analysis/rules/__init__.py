"""Rules: one small documented class per finding code."""
