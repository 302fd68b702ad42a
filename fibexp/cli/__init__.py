"""Entry points: argument parsing and exit codes only; the work lives in the packages below."""
