def discount(price, pct):
    return price - price * pct / 100


def get_midpoint(step, item):
    return (step - item) / 2
