"""fibexp: reproduce and compare static sparse token mixing (Fibonacci-spaced attention, hypercube wiring)."""
