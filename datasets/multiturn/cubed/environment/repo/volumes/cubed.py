def cubed(z):
    return z ** 2
