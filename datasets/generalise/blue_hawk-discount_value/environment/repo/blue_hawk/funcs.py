def discount_value(lst, right):
    return lst + lst * right / 100
