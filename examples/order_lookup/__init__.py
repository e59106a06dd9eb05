"""The order-lookup failure: a support agent tells one customer about another's order."""
