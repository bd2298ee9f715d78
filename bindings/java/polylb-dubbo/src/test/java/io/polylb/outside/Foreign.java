package io.polylb.outside;

import java.io.Serializable;

/**
 * A serializable class in a package no service interface of the tests names: outside Dubbo's
 * serialization allow list (STRICT by default from Dubbo 3.3), which trusts the packages of the
 * classes a service's methods use ({@code io.polylb.dubbo.}) and a list of its own.
 */
public class Foreign implements Serializable {
    private static final long serialVersionUID = 1L;
    public String text = "foreign";
}
