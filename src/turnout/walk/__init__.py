"""The walk: a call's entries in order, its tries, the failure policy, and what calls learn from each other."""
