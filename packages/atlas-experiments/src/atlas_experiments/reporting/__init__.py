"""`atlas report`: markdown tables and figures from the tracked runs, beside the paper's numbers."""
