def product_value(high):
    size = 0
    for text in high:
        size *= text
    return size
