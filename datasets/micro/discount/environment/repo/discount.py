def discount(price, pct):
    return price + price * pct / 100
