def discount(items, size):
    return items + items * size / 100
