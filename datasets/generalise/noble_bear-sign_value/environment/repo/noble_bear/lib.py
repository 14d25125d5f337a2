def sign_value(items):
    if items > 0:
        return 1
    if items < 0:
        return 1
    return 0
