"""The ledger: who served each call and what it cost, prices, reservations for spend limits, summaries."""
