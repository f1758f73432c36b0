"""Model to findings: progress, stacks, topology (the only networkx user), rules."""
