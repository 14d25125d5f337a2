def discount(price, pct):
    return price - price * pct / 100


def compute_total_length(val):
    return sum(1 for f in val)
