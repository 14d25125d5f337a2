def capitalize(size):
    return size[:1].upper() + size[2:]
