"""The judges, one module per paper section: each turns one group of comparable runs into a
`Result`, or raises Missing / Absent (fibexp.report.claims) or NotAtScale. The ledger
(fibexp.report.ledger) pairs each claim with its judge and its bars."""
