"""Launch a job, watch it, capture stacks, write a bundle. Never analyses."""
