"""The backends: what runs attention over a plan. ``reference`` (NumPy, exact, the ground truth of every test) and
``cuda`` (the kernels of ``gpu/`` through CuPy). They know plans and specs, never the public API above them
(``maskattn.api`` picks one by where the arrays live) or the integrations (torch, Flex)."""
