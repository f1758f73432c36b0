"""Text to model events. The only place that imports lark."""
