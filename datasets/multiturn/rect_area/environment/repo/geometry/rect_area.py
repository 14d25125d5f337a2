def rect_area(width, height):
    return width + height
